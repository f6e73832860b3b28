//! Conformance checks: inputs at the edge of what every store can hold.
//!
//! A sequence past [`MAX_SEQUENCE`] or an instant outside the accepted years
//! is refused with `invalid`, naming the field, before anything is written —
//! the same on every backend, whatever its own integer or text types could
//! have clamped or wrapped it into. Numbers inside payloads and metadata go
//! the other way: their values are kept exactly, however large or long, and
//! so is their text as long as it has no exponent (PostgreSQL's jsonb writes
//! `1e-7` out as `0.0000001`, the same value).

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Harness, code, gn, obj, sn};
use crate::backend::{Error, Partitions, ReadRequest, Replay, ResetRequest, Result};
use crate::model::{
    EventInput, GroupName, GroupSpec, MAX_SEQUENCE, OrderBy, Position, Query, QueryCursor,
    StartAfter, StartPosition, StreamName, Timestamp, parse_where,
};

/// The field an `invalid` error names (any other result fails the check).
fn invalid_field<T: std::fmt::Debug>(r: Result<T>) -> String {
    match r {
        Err(Error::Invalid(e)) => e.field,
        other => panic!("expected invalid, got {other:?}"),
    }
}

/// Sequences no store can be asked about: one past the maximum, and the
/// largest `u64` (which an SQL store would clamp and `+ 1` would wrap).
const BEYOND: [u64; 2] = [MAX_SEQUENCE + 1, u64::MAX];

/// An instant past the end of year 9999.
const TOO_LATE: Timestamp = Timestamp::from_millis(i64::MAX);

fn after_all(seq: u64) -> StartPosition {
    StartPosition::After(StartAfter::All(seq))
}

fn spec(name: &str, start: StartPosition) -> GroupSpec {
    GroupSpec {
        start,
        ..GroupSpec::new(gn(name))
    }
}

fn reset_req(s: &StreamName, g: &GroupName, confirm: bool, start: StartPosition) -> ResetRequest {
    ResetRequest {
        stream: s.clone(),
        group: g.clone(),
        confirm,
        start,
        partitions: Partitions::All,
        ordering: None,
        flow: None,
    }
}

fn read_req(s: &StreamName, after: u64) -> ReadRequest {
    ReadRequest {
        stream: s.clone(),
        partition: 0,
        after,
        limit: 10,
    }
}

/// `(frontier, high_watermark, lag)` of every partition, and the total lag.
async fn lag_view(h: &Harness, s: &StreamName, g: &GroupName) -> (Vec<(u64, u64, u64)>, u64) {
    let lag = h.lag(s, g).await;
    let parts = lag
        .partitions
        .values()
        .map(|p| (p.frontier, p.high_watermark, p.lag))
        .collect();
    (parts, lag.lag)
}

pub async fn start_points_beyond_the_maximum_are_refused(h: &Harness) {
    let s = h.stream("s", 2).await;
    h.append_n(&s, 2).await;
    for seq in BEYOND {
        let r = h.b().create_group(&s, spec("g", after_all(seq))).await;
        assert_eq!(invalid_field(r), "start_after", "{seq}");
        let map = BTreeMap::from([(0, 1), (1, seq)]);
        let per_partition = StartPosition::After(StartAfter::PerPartition(map));
        let r = h.b().create_group(&s, spec("g", per_partition)).await;
        assert_eq!(invalid_field(r), "start_after.1", "{seq}");
    }
    let late = h
        .b()
        .create_group(&s, spec("g", StartPosition::At(TOO_LATE)));
    assert_eq!(invalid_field(late.await), "start_at");
    assert_eq!(h.b().list_groups(&s).await.expect("list").len(), 0);
    // the validation comes first: an unknown stream does not hide it
    let unknown = sn("nope");
    let r = h.b().create_group(&unknown, spec("g", after_all(u64::MAX)));
    assert_eq!(invalid_field(r.await), "start_after");
}

pub async fn start_after_the_maximum_waits_for_nothing(h: &Harness) {
    let s = h.stream("s", 2).await;
    h.append_to(&s, 0, 2).await;
    h.append_to(&s, 1, 1).await;
    let g = h.group_with(&s, spec("g", after_all(MAX_SEQUENCE))).await;
    let map = BTreeMap::from([(1, MAX_SEQUENCE)]);
    let per_partition = StartPosition::After(StartAfter::PerPartition(map));
    let mixed = h.group_with(&s, spec("mixed", per_partition)).await;

    assert_eq!(
        lag_view(h, &s, &g).await,
        (vec![(MAX_SEQUENCE, 2, 0), (MAX_SEQUENCE, 1, 0)], 0)
    );
    assert!(
        h.fetch(&s, &g, 10).await.is_empty(),
        "nothing lies after it"
    );
    let info = h.b().group_info(&s, &g).await.expect("group info");
    assert_eq!(
        info.cursors,
        BTreeMap::from([(0, MAX_SEQUENCE + 1), (1, MAX_SEQUENCE + 1)])
    );
    assert_eq!(
        (info.lag.pending, info.lag.inflight, info.inflight),
        (0, 0, 0)
    );
    let due = h.b().next_due(&s, &g, &Partitions::All).await;
    assert_eq!(due.expect("next due"), None);

    // later appends are still below the start point: never delivered
    h.append_to(&s, 0, 3).await;
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    assert_eq!(lag_view(h, &s, &g).await.1, 0);

    // a map starts only its own partitions there; the others from the start
    let leases = h.fetch(&s, &mixed, 10).await;
    let got: Vec<_> = leases
        .iter()
        .map(|l| (l.event.partition, l.event.sequence))
        .collect();
    assert_eq!(got, vec![(0, 1), (0, 2), (0, 3), (0, 4), (0, 5)]);
    assert_eq!(lag_view(h, &s, &mixed).await.0[1], (MAX_SEQUENCE, 1, 0));
}

pub async fn reset_beyond_the_maximum_is_refused_and_changes_nothing(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    h.append_n(&s, 3).await;
    let first = h.fetch(&s, &g, 1).await;
    h.ack(&first[0]).await.expect("ack");
    let before = lag_view(h, &s, &g).await;
    for seq in BEYOND {
        let r = h.b().reset(reset_req(&s, &g, true, after_all(seq))).await;
        assert_eq!(invalid_field(r), "start_after", "{seq}");
        let map = StartPosition::After(StartAfter::PerPartition(BTreeMap::from([(0, seq)])));
        let r = h.b().reset(reset_req(&s, &g, true, map)).await;
        assert_eq!(invalid_field(r), "start_after.0", "{seq}");
    }
    let late = reset_req(&s, &g, true, StartPosition::At(TOO_LATE));
    assert_eq!(invalid_field(h.b().reset(late).await), "start_at");
    let unconfirmed = reset_req(&s, &g, false, after_all(u64::MAX));
    assert_eq!(
        code(h.b().reset(unconfirmed).await),
        "confirm_required",
        "confirm is checked before anything else"
    );
    assert_eq!(lag_view(h, &s, &g).await, before);
    let next = h.fetch(&s, &g, 10).await;
    let seqs: Vec<u64> = next.iter().map(|l| l.event.sequence).collect();
    assert_eq!(seqs, vec![2, 3], "the group carries on where it was");

    // a reset to the maximum itself is honoured: nothing is left to deliver
    let to_max = reset_req(&s, &g, true, after_all(MAX_SEQUENCE));
    h.b().reset(to_max).await.expect("reset to the maximum");
    assert_eq!(lag_view(h, &s, &g).await, (vec![(MAX_SEQUENCE, 3, 0)], 0));
    assert!(h.fetch(&s, &g, 10).await.is_empty());
    for lease in &next {
        assert_eq!(code(h.ack(lease).await), "stale_lease");
    }
}

pub async fn positions_beyond_the_maximum_are_refused_everywhere(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    h.append_n(&s, 2).await;
    let all = Partitions::All;
    for seq in BEYOND {
        let replay = Replay::FromSequence {
            after: seq,
            partitions: all.clone(),
        };
        let r = h.b().replay(&s, &g, replay).await;
        assert_eq!(invalid_field(r), "from_sequence", "{seq}");
        assert_eq!(invalid_field(h.b().read(read_req(&s, seq)).await), "after");
        let bounds = [
            Query {
                after_sequence: Some(seq),
                ..Query::default()
            },
            Query {
                until_sequence: Some(seq),
                ..Query::default()
            },
        ];
        for (query, field) in bounds.into_iter().zip(["after_sequence", "until_sequence"]) {
            assert_eq!(invalid_field(h.b().query(&s, &query).await), field);
            let r = h.b().replay(&s, &g, Replay::Query(query)).await;
            assert_eq!(invalid_field(r), field, "a replay by query too");
        }
        let cursor = QueryCursor {
            order: OrderBy::default(),
            positions: BTreeMap::from([(
                0,
                Position {
                    timestamp: 0,
                    sequence: seq,
                },
            )]),
        };
        let paged = Query {
            cursor: Some(cursor),
            ..Query::default()
        };
        assert_eq!(invalid_field(h.b().query(&s, &paged).await), "cursor");
    }
    let late = Replay::FromTime {
        from: TOO_LATE,
        partitions: all.clone(),
    };
    assert_eq!(invalid_field(h.b().replay(&s, &g, late).await), "from");
    let late = Query {
        to: Some(TOO_LATE),
        ..Query::default()
    };
    assert_eq!(invalid_field(h.b().query(&s, &late).await), "to");

    // at the maximum everything answers, with nothing past it
    let at_max = Replay::FromSequence {
        after: MAX_SEQUENCE,
        partitions: all,
    };
    assert_eq!(h.b().replay(&s, &g, at_max).await.expect("replay"), 0);
    let read = h.b().read(read_req(&s, MAX_SEQUENCE)).await;
    assert_eq!(read.expect("read"), vec![]);
    let after_max = Query {
        after_sequence: Some(MAX_SEQUENCE),
        ..Query::default()
    };
    assert_eq!(
        h.b().query(&s, &after_max).await.expect("query").events,
        vec![]
    );
    let until_max = Query {
        until_sequence: Some(MAX_SEQUENCE),
        ..Query::default()
    };
    let page = h.b().query(&s, &until_max).await.expect("query");
    assert_eq!(page.events.len(), 2);
    assert_eq!(h.fetch(&s, &g, 10).await.len(), 2, "the group is untouched");
}

/// The payload and metadata of the number check, as text: integers past
/// 2^64 either way and a decimal, which an `f64` would round or reformat.
const NUMBERS: &str = r#"{"f":1.5,"n":18446744073709551617,"neg":-18446744073709551617,"tag":"x"}"#;
const META: &str = r#"{"big":18446744073709551617,"correlation_id":"c1","pi":3.14159265358979323846264338327950288}"#;

pub async fn payload_numbers_are_kept_exactly(h: &Harness) {
    let s = h.stream("s", 1).await;
    let g = h.group(&s, "g").await;
    let parse = |text: &str| obj(serde_json::from_str::<Value>(text).expect("valid JSON"));
    let input = EventInput {
        metadata: parse(META),
        ..EventInput::with_payload(parse(NUMBERS))
    };
    let text = |o: &crate::model::JsonObject| serde_json::to_string(o).expect("serializes");
    let check = |what: &str, events: &[crate::model::Event]| {
        assert_eq!(events.len(), 1, "{what}");
        assert_eq!(text(&events[0].payload), NUMBERS, "{what}: payload");
        assert_eq!(text(&events[0].metadata), META, "{what}: metadata");
    };
    check("append", &h.append_inputs(&s, vec![input]).await);
    check("read", &h.b().read(read_req(&s, 0)).await.expect("read"));
    let everything = h.b().query(&s, &Query::default()).await.expect("query");
    check("query", &everything.events);
    let by_tag = Query {
        filters: parse_where(&serde_json::json!({"tag": "x", "correlation_id": "c1"}))
            .expect("filter"),
        ..Query::default()
    };
    let filtered = h.b().query(&s, &by_tag).await.expect("query");
    check("filtered query", &filtered.events);
    let leases = h.fetch(&s, &g, 10).await;
    let delivered: Vec<_> = leases.iter().map(|l| (*l.event).clone()).collect();
    check("fetch", &delivered);
}
