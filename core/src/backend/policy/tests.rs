//! Table tests of the shared rules.

use std::collections::{BTreeMap, HashSet};

use super::gates::Regate;
use super::*;
use crate::model::{
    EventId, EventInput, Flow, GroupOrdering, SettleOp, StartAfter, StartPosition, Timestamp,
};

fn input(id: Option<&str>) -> EventInput {
    EventInput {
        id: id.map(|i| EventId::parse(i).unwrap()),
        ..EventInput::default()
    }
}

#[test]
fn known_and_repeated_ids_are_not_fresh() {
    let routed = vec![
        (input(Some("a")), 0),
        (input(Some("b")), 1),
        (input(Some("a")), 0),
        (input(None), 1),
    ];
    let known = HashSet::from([EventId::parse("b").unwrap()]);
    let plan = plan_append(&routed, &known);
    assert_eq!(plan.fresh, [true, false, false, true]);
    assert_eq!(plan.per_partition, BTreeMap::from([(0, 1), (1, 1)]));
}

#[test]
fn a_batch_routes_by_partition_then_key_then_zero_and_refuses_as_a_whole() {
    let keyed = EventInput {
        key: Some("customer-7".into()),
        ..EventInput::default()
    };
    let pinned = EventInput {
        partition: Some(2),
        ..EventInput::default()
    };
    let routed = route_batch(vec![pinned.clone(), keyed.clone(), input(None)], 4).unwrap();
    let partitions: Vec<u32> = routed.iter().map(|(_, p)| *p).collect();
    let by_key = crate::model::kafka_partition(b"customer-7", 4);
    assert_eq!(partitions, [2, by_key, 0]);

    let outside = EventInput {
        partition: Some(4),
        ..EventInput::default()
    };
    let err = route_batch(vec![keyed, outside], 4).unwrap_err();
    assert_eq!(err.code(), "invalid_partition");
}

#[test]
fn settle_writes_follow_attempts_reasons_and_backoff() {
    let config = GroupConfig {
        max_attempts: 3,
        retry_backoff_ms: vec![100, 250],
        ordering: crate::model::GroupOrdering::None,
        on_exhausted: crate::model::OnExhausted::DeadLetter,
        flow: Flow::default(),
    };
    let now = Timestamp::from_millis(1000);
    let nack = |reason: Option<&str>, delay| SettleOp::Nack {
        reason: reason.map(Into::into),
        delay_ms: delay,
    };
    let retry = |due: Option<i64>, reason: &str| Write::Retry {
        due: due.map(Timestamp::from_millis),
        reason: reason.into(),
    };
    // (operation, attempt, expected write)
    let table = [
        (SettleOp::Ack, 1, Write::Ack),
        (SettleOp::Ack, 3, Write::Ack),
        (nack(None, None), 1, retry(Some(1100), "retry")),
        (nack(Some("busy"), None), 2, retry(Some(1250), "busy")),
        (nack(None, Some(0)), 2, retry(None, "retry")),
        (nack(None, Some(5)), 1, retry(Some(1005), "retry")),
        (
            nack(Some("busy"), None),
            3,
            Write::Dead("max_attempts: busy".into()),
        ),
        (
            nack(None, Some(0)),
            4,
            Write::Dead("max_attempts: retry".into()),
        ),
        (
            SettleOp::Reject { reason: None },
            1,
            Write::Dead("rejected".into()),
        ),
        (
            SettleOp::Reject {
                reason: Some("bad total".into()),
            },
            2,
            Write::Dead("bad total".into()),
        ),
    ];
    for (op, attempt, expected) in table {
        let label = format!("{op:?} at attempt {attempt}");
        assert_eq!(
            settle_write(op.clone(), attempt, true, &config, now),
            expected,
            "{label}"
        );
        // Under quarantine, a gated delivery out of attempts is parked,
        // not dead; a reject, or one that is not gated, is still dead.
        let parks = GroupConfig {
            on_exhausted: crate::model::OnExhausted::Quarantine,
            ..config.clone()
        };
        let exhausted = matches!(op, SettleOp::Nack { .. }) && attempt >= parks.max_attempts;
        let quarantined = match &expected {
            Write::Dead(reason) if exhausted => Write::Quarantine(reason.clone()),
            other => other.clone(),
        };
        assert_eq!(
            settle_write(op.clone(), attempt, true, &parks, now),
            quarantined,
            "{label}, quarantine"
        );
        assert_eq!(
            settle_write(op, attempt, false, &parks, now),
            expected,
            "{label}, quarantine, not gated"
        );
    }
    assert_eq!(
        poison_write(true, &config),
        Write::Dead(POISON_REASON.into())
    );
    let parks = GroupConfig {
        on_exhausted: crate::model::OnExhausted::Quarantine,
        ..config
    };
    assert_eq!(
        poison_write(true, &parks),
        Write::Quarantine(POISON_REASON.into())
    );
    assert_eq!(
        poison_write(false, &parks),
        Write::Dead(POISON_REASON.into())
    );
    let immediate = GroupConfig {
        max_attempts: 5,
        retry_backoff_ms: vec![],
        ordering: crate::model::GroupOrdering::None,
        on_exhausted: crate::model::OnExhausted::DeadLetter,
        flow: Flow::default(),
    };
    let write = settle_write(nack(None, None), 1, false, &immediate, now);
    assert_eq!(write, retry(None, "retry"));
    assert!(write.requeues());
    assert!(!retry(Some(1), "x").requeues());
}

#[test]
fn the_poison_guard_takes_the_last_attempt() {
    assert!(!poisoned(1, 3));
    assert!(!poisoned(2, 3));
    assert!(poisoned(3, 3));
    assert!(poisoned(4, 3));
    assert_eq!(POISON_REASON, "max_attempts_expired");
}

#[test]
fn start_points_per_position() {
    let marks = [
        Marks {
            first_at_or_after: Some(4),
            high_watermark: 9,
        },
        Marks {
            first_at_or_after: None,
            high_watermark: 7,
        },
    ];
    let at = StartPosition::At(Timestamp::from_millis(5));
    let per = StartPosition::After(StartAfter::PerPartition(BTreeMap::from([(1, 3)])));
    // (start, expected exclusive start per partition)
    let table = [
        (StartPosition::Beginning, vec![0, 0]),
        (StartPosition::After(StartAfter::All(5)), vec![5, 5]),
        (per.clone(), vec![0, 3]),
        (at.clone(), vec![3, 7]),
    ];
    for (start, expected) in table {
        assert_eq!(start_points(&start, 2, &marks), expected, "{start:?}");
    }
    assert_eq!(
        start_lookup(&at, 2).unwrap(),
        Some(Timestamp::from_millis(5))
    );
    assert_eq!(start_lookup(&per, 2).unwrap(), None);
    assert_eq!(
        start_lookup(&per, 1).unwrap_err().code(),
        "invalid_partition"
    );
}

#[test]
fn round_robin_shares_fairly_and_rotates() {
    assert_eq!(round_robin(&[10, 10], 2, 0), [1, 1]);
    assert_eq!(round_robin(&[10, 10], 1, 0), [1, 0]);
    assert_eq!(round_robin(&[10, 10], 1, 1), [0, 1]);
    assert_eq!(round_robin(&[1, 10, 0], 6, 0), [1, 5, 0]);
    assert_eq!(round_robin(&[2, 2], 10, 0), [2, 2]);
    assert_eq!(round_robin(&[], 3, 0), Vec::<usize>::new());
    assert_eq!(
        claim_capacity(2, 4, 10),
        9,
        "2 claimable + sequences 4..=10"
    );
    assert_eq!(claim_capacity(0, 11, 10), 0);
}

#[test]
fn frontier_and_lag_add_up() {
    assert_eq!(frontier(None, 1), 0);
    assert_eq!(frontier(None, 8), 7);
    assert_eq!(frontier(Some(3), 8), 2);
    assert_eq!(frontier(Some(9), 8), 7, "never past the cursor");

    let (s, g) = (
        crate::model::StreamName::parse("s").unwrap(),
        crate::model::GroupName::parse("g").unwrap(),
    );
    let mut lag = LagBuilder::new(&s, &g);
    let open = OpenCounts {
        first_open: Some(3),
        leased: 1,
        fresh: 2,
        waiting: 1,
    };
    assert_eq!(lag.add(0, 6, 10, open), 2);
    assert_eq!(lag.add(1, 4, 3, OpenCounts::default()), 3);
    lag.unsettled_since(Timestamp::from_millis(100), Timestamp::from_millis(600));
    lag.unsettled_since(Timestamp::from_millis(400), Timestamp::from_millis(600));
    let lag = lag.lag;
    assert_eq!(lag.lag, 8, "partition 0: 10 - 2; partition 1: caught up");
    assert_eq!(lag.pending, 5 + 2, "sequences 6..=10 plus two fresh");
    assert_eq!((lag.inflight, lag.waiting_retry), (1, 1));
    assert_eq!(lag.oldest_unacked_age_ms, Some(500));
}

#[test]
fn only_acks_of_distinct_events_without_a_foreign_receipt_are_plain() {
    use crate::model::{LeaseId, SettleTarget, Settlement};
    let item = |event: &str, op: SettleOp, receipt: Option<&str>| {
        let lease_id = LeaseId::parse("l-1").unwrap();
        Settlement {
            target: SettleTarget {
                event_id: EventId::parse(event).unwrap(),
                receipt: receipt.map(|r| r.replace("own", lease_id.as_str())),
                lease_id,
            },
            op,
        }
    };
    let ack = |event| item(event, SettleOp::Ack, None);
    assert!(plain_acks(&[ack("a"), ack("b")]));
    assert!(plain_acks(&[item("a", SettleOp::Ack, Some("own"))]));
    assert!(!plain_acks(&[]), "nothing to apply");
    assert!(!plain_acks(&[ack("a"), ack("a")]), "one event twice");
    assert!(!plain_acks(&[item("a", SettleOp::Ack, Some("other"))]));
    assert!(!plain_acks(&[
        ack("a"),
        item("b", SettleOp::Reject { reason: None }, None)
    ]));
}

/// (sequence, key) pairs from 1 on, `""` for no key.
fn walked(keys: &[&str]) -> Vec<(u64, Option<String>)> {
    keys.iter()
        .enumerate()
        .map(|(i, k)| (i as u64 + 1, (!k.is_empty()).then(|| (*k).to_owned())))
        .collect()
}

#[test]
fn a_gate_walk_leases_free_gates_parks_busy_ones_and_stops_when_it_has_enough() {
    let events = walked(&["a", "b", "a", "", "c", "b", "d"]);
    let mut walk = GateWalk::new(ordered(GroupOrdering::Key), 1, 3);
    assert_eq!(walk.window(7), Some((1, 7)), "the first window holds 16");
    let asked = walk.to_ask(&events);
    assert_eq!(asked, ["a", "b", "c", "d"].map(String::from).into());
    // b has a delivery out already.
    walk.pass(events, |gate| GateState::busy(gate == "b"));
    let leased: Vec<u64> = walk.lease.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(leased, [1, 4, 5], "a, the keyless event, c");
    assert_eq!(walk.park, [(2, "b".to_owned()), (3, "a".to_owned())]);
    assert_eq!(walk.next, 6, "the cursor stops after the last one leased");
    assert_eq!(walk.window(7), None, "it has what it wants");
}

#[test]
fn a_gate_walk_doubles_its_windows_and_stops_at_the_claims_limit_or_the_end() {
    let mut walk = GateWalk::new(ordered(GroupOrdering::Key), 1, 2);
    let mut windows = Vec::new();
    while let Some((first, last)) = walk.window(u64::MAX) {
        windows.push((first, last));
        let hot: Vec<(u64, Option<String>)> = (first..=last)
            .map(|seq| (seq, Some("hot".into())))
            .collect();
        walk.pass(hot, |_| GateState::BUSY);
    }
    assert_eq!(windows[..3], [(1, 16), (17, 48), (49, 112)]);
    assert_eq!(
        walk.next,
        1 + WALK_PER_CLAIM as u64,
        "one claim looks at so many"
    );
    assert_eq!(walk.park.len(), WALK_PER_CLAIM);
    assert!(walk.lease.is_empty());

    let mut walk = GateWalk::new(ordered(GroupOrdering::Key), 5, 10);
    assert_eq!(walk.window(6), Some((5, 6)));
    walk.pass(Vec::new(), |_| GateState::FREE);
    assert_eq!(walk.window(6), None, "a window without events ends it");
}

#[test]
fn a_partition_walk_stops_at_its_first_busy_event() {
    let mut walk = GateWalk::new(ordered(GroupOrdering::Partition), 1, 5);
    let events = walked(&["a", "b", "c"]);
    assert_eq!(walk.to_ask(&events), [String::new()].into());
    walk.pass(events.clone(), |_| GateState::FREE);
    assert_eq!(walk.lease, [(1, Some(String::new()))]);
    assert!(walk.park.is_empty(), "nothing is parked");
    assert_eq!((walk.next, walk.window(10)), (2, None));

    let mut busy = GateWalk::new(ordered(GroupOrdering::Partition), 1, 5);
    busy.pass(events, |_| GateState::BUSY);
    assert!(busy.lease.is_empty() && busy.park.is_empty());
    assert_eq!(busy.next, 1, "the cursor stays");
}

/// What claiming one delivery at a time, partition by partition in
/// rotation from `first`, takes from partitions that hold `have` each:
/// the rule `Share` must match without knowing `have` up front.
fn one_at_a_time(have: &[usize], limit: usize, first: usize) -> Vec<usize> {
    let n = have.len();
    let mut took = vec![0; n];
    let mut open = vec![true; n];
    let mut total = 0;
    while total < limit && open.contains(&true) {
        for i in (0..n).map(|i| (first + i) % n) {
            if total == limit {
                break;
            }
            if !open[i] {
                continue;
            }
            if took[i] < have[i] {
                took[i] += 1;
                total += 1;
            } else {
                open[i] = false;
            }
        }
    }
    took
}

/// Drives a `Share` over partitions that truly hold `have`, bounded by
/// `bound` (at least `have`): each asked partition gives what it can.
fn share_out(have: &[usize], bound: &[usize], limit: usize, first: usize) -> (Vec<usize>, usize) {
    let mut share = Share::new(bound.to_vec(), limit, first);
    let mut given = vec![0; have.len()];
    let mut rounds = 0;
    while !share.done() {
        rounds += 1;
        for (i, ask) in share.asks().into_iter().enumerate() {
            let got = ask.min(have[i] - given[i]);
            given[i] += got;
            share.gave(i, ask, got);
        }
        assert!(
            rounds <= have.len() + 1,
            "a share ends in a round per partition"
        );
    }
    (given, rounds)
}

#[test]
fn a_share_hands_a_spent_partitions_part_to_the_others() {
    // Exact bounds: one round, the plain round-robin.
    assert_eq!(share_out(&[10, 10], &[10, 10], 3, 0), (vec![2, 1], 1));
    // Partition 0 looked like 30 but has 1 (all its events wait behind a
    // busy key): its share goes to the others.
    let (given, rounds) = share_out(&[1, 30, 10], &[30, 30, 20], 50, 0);
    assert_eq!((given, rounds), (vec![1, 30, 10], 2));
    assert_eq!(share_out(&[0, 8], &[2, 8], 1, 0).0, [0, 1]);
    assert_eq!(share_out(&[1, 30, 10], &[30, 30, 20], 21, 2).0, [1, 10, 10]);
    assert_eq!(share_out(&[0, 0], &[5, 5], 4, 1), (vec![0, 0], 1));
    assert_eq!(share_out(&[], &[], 4, 0), (vec![], 0));
}

#[test]
fn a_share_gives_what_one_claim_at_a_time_in_rotation_gives() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..2_000 {
        let n = rng.random_range(1..=5);
        let have: Vec<usize> = (0..n).map(|_| rng.random_range(0..=6)).collect();
        let bound: Vec<usize> = have.iter().map(|h| h + rng.random_range(0..=6)).collect();
        let limit = rng.random_range(0..=25);
        let first = rng.random_range(0..n);
        let want = one_at_a_time(&have, limit, first);
        assert_eq!(
            share_out(&have, &bound, limit, first).0,
            want,
            "have {have:?}, bound {bound:?}, limit {limit}, first {first}"
        );
        assert_eq!(round_robin(&have, limit, first), want);
    }
}

#[test]
fn a_gate_hands_out_its_lowest_open_delivery_unless_one_is_out() {
    let view = |out, head, lowest| GateView::one(out, head, lowest);
    let step = |release: Option<u64>, park: Option<u64>| Regate {
        release: release.into_iter().collect(),
        park: park.into_iter().collect(),
    };
    // After an ack or a dead letter of the head: its lowest parked one.
    assert_eq!(regate(&view(false, None, Some(7))), step(Some(7), None));
    assert_eq!(regate(&view(false, None, None)), step(None, None), "empty");
    // A retried head parked at 5, nothing lower: it is the head again.
    assert_eq!(regate(&view(false, None, Some(5))), step(Some(5), None));
    // A replay re-opened 2 while 5 is out: nothing changes until 5 settles.
    assert_eq!(regate(&view(true, None, Some(2))), step(None, None));
    // A replay re-opened 2 below the head 5 not yet claimed: 2 goes first.
    assert_eq!(
        regate(&view(false, Some(5), Some(2))),
        step(Some(2), Some(5))
    );
    // The head is the lowest already.
    assert_eq!(regate(&view(false, Some(2), Some(2))), step(None, None));
    // Out and handed out at once breaks the rule: the handed out one parks.
    assert_eq!(regate(&view(true, Some(4), Some(2))), step(None, Some(4)));
}

#[test]
fn a_gate_of_several_slots_hands_out_its_lowest_open_deliveries_beside_those_out() {
    let view = |out, heads: &[u64], waiting: &[u64]| GateView {
        slots: 3,
        out,
        heads: heads.to_vec(),
        waiting: waiting.to_vec(),
    };
    let step = |release: &[u64], park: &[u64]| Regate {
        release: release.to_vec(),
        park: park.to_vec(),
    };
    // One out, two slots left: the two lowest waiting go out.
    assert_eq!(regate(&view(1, &[], &[4, 6, 9])), step(&[4, 6], &[]));
    // Nothing changes when the heads are the lowest already.
    assert_eq!(regate(&view(1, &[4, 6], &[4, 6, 9])), step(&[], &[]));
    // A replay re-opened 2: it takes the place of the highest head.
    assert_eq!(regate(&view(1, &[4, 6], &[2, 4, 6])), step(&[2], &[6]));
    // Every slot out: the heads not yet claimed park again.
    assert_eq!(regate(&view(3, &[4], &[4, 6])), step(&[], &[4]));
    // Fewer waiting than slots: all of them.
    assert_eq!(regate(&view(0, &[], &[8])), step(&[8], &[]));
}

#[test]
fn a_walk_with_key_concurrency_leases_up_to_n_per_key_and_parks_behind_a_full_or_parked_key() {
    let gating = Gating::new(
        GroupOrdering::None,
        &Flow {
            key_concurrency: Some(2),
            ..Flow::default()
        },
    );
    assert_eq!((gating.slots(), gating.gate(Some("a"))), (2, Some("a")));
    assert_eq!(gating.gate(None), None, "a keyless event has no gate");
    let events = walked(&["a", "a", "a", "b", "c", "", "b", "c"]);
    let mut walk = GateWalk::new(gating, 1, 10);
    assert_eq!(walk.window(8), Some((1, 8)));
    // b has one head out already; c has a slot free but one parked.
    let state = |gate: &str| match gate {
        "b" => GateState {
            heads: 1,
            parked: false,
        },
        "c" => GateState {
            heads: 0,
            parked: true,
        },
        _ => GateState::FREE,
    };
    walk.pass(events, state);
    let leased: Vec<u64> = walk.lease.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(leased, [1, 2, 4, 6], "two of a, one more of b, the keyless");
    let parked: Vec<u64> = walk.park.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(parked, [3, 5, 7, 8], "a is full, c parked, b full");
    assert_eq!(walk.next, 9, "the walk goes on past a full key");
    // A gate the walk filled is not asked about again.
    let more = walked(&["a", "b", "d"]);
    assert_eq!(walk.to_ask(&more), ["d".to_owned()].into());
    // An ordering is one slot, whatever the flow says.
    let ordered = Gating::new(
        GroupOrdering::Key,
        &Flow {
            key_concurrency: Some(4),
            ..Flow::default()
        },
    );
    assert_eq!(ordered.slots(), 1);
    assert_eq!(ordered.gate_source(), "key");
    assert_eq!(gating.gate_source(), "key");
    assert!(!Gating::new(GroupOrdering::None, &Flow::default()).is_gated());
}

/// The gating of an ordered group.
fn ordered(ordering: GroupOrdering) -> Gating {
    Gating::new(ordering, &Flow::default())
}

#[test]
fn a_settle_or_renewal_holds_only_under_the_current_lease() {
    use crate::model::{LeaseId, SettleTarget};
    let target = |lease: &str, receipt: Option<&str>| SettleTarget {
        event_id: EventId::parse("e").unwrap(),
        lease_id: LeaseId::parse(lease).unwrap(),
        receipt: receipt.map(str::to_owned),
    };
    let held = |lease_id, receipt| Some(Held { lease_id, receipt });
    let code = |r: Result<()>| r.map_err(|e| e.code());
    assert_eq!(code(fence(held("l1", "r1"), &target("l1", None))), Ok(()));
    assert_eq!(
        code(fence(held("l1", "r1"), &target("l1", Some("r1")))),
        Ok(())
    );
    let mismatch = fence(held("l1", "r1"), &target("l1", Some("r2")));
    assert_eq!(code(mismatch), Err("receipt_mismatch"));
    // A lease taken over, or a delivery no longer leased, is stale
    // whatever the receipt says.
    let stale = fence(held("l2", "r1"), &target("l1", Some("r2")));
    assert_eq!(code(stale), Err("stale_lease"));
    assert_eq!(
        code(fence(None, &target("l1", Some("r1")))),
        Err("stale_lease")
    );
}

#[test]
fn a_walk_whose_share_grew_before_it_started_reads_it_in_one_window() {
    let mut walk = GateWalk::new(ordered(GroupOrdering::Key), 1, 0);
    walk.want_more(50);
    assert_eq!(walk.window(1_000), Some((1, 50)));
    let mut walk = GateWalk::new(ordered(GroupOrdering::Key), 1, 3);
    assert_eq!(walk.window(1_000), Some((1, 16)), "at least 16");
}

mod lease_pages {
    use super::*;
    use crate::model::{ConsumerId, LeaseCursor, LeaseId};

    fn row(partition: u32, sequence: u64, expires_at: i64) -> LeaseRow {
        LeaseRow {
            partition,
            sequence,
            event_id: EventId::parse(format!("e{partition}-{sequence}")).unwrap(),
            lease_id: LeaseId::parse(format!("l{partition}-{sequence}")).unwrap(),
            consumer_id: ConsumerId::parse("c1").unwrap(),
            attempt: 1,
            leased_at: Timestamp::from_millis(0),
            expires_at: Timestamp::from_millis(expires_at),
            reason: Some("kept only for the quarantine's".into()),
        }
    }

    fn at(partition: u32, sequence: u64) -> LeaseCursor {
        LeaseCursor {
            partition,
            sequence,
        }
    }

    fn positions(page: &crate::model::LeasePage) -> Vec<(u32, u64)> {
        page.leases
            .iter()
            .map(|l| (l.partition, l.sequence))
            .collect()
    }

    #[test]
    fn a_page_is_in_partition_then_sequence_order_after_its_cursor() {
        let rows = || vec![row(1, 2, 9), row(0, 7, 9), row(1, 1, 9), row(0, 3, 9)];
        let now = Timestamp::from_millis(5);
        let page = lease_page(rows(), None, 10, now);
        assert_eq!(positions(&page), [(0, 3), (0, 7), (1, 1), (1, 2)]);
        assert_eq!((page.next, page.now), (None, now));
        let page = lease_page(rows(), Some(at(0, 7)), 10, now);
        assert_eq!(positions(&page), [(1, 1), (1, 2)]);
        let page = lease_page(rows(), Some(at(0, 5)), 2, now);
        assert_eq!(positions(&page), [(0, 7), (1, 1)]);
        assert_eq!(page.next, Some(at(1, 1)), "a lease follows");
        let page = lease_page(rows(), Some(at(1, 1)), 1, now);
        assert_eq!((positions(&page), page.next), (vec![(1, 2)], None));
        let page = lease_page(rows(), Some(at(u32::MAX, 0)), 5, now);
        assert!(page.leases.is_empty() && page.next.is_none());
    }

    #[test]
    fn a_lease_has_expired_from_its_expiry_on() {
        let rows = vec![row(0, 1, 4), row(0, 2, 5), row(0, 3, 6)];
        let page = lease_page(rows, None, 10, Timestamp::from_millis(5));
        let expired: Vec<bool> = page.leases.iter().map(|l| l.expired).collect();
        assert_eq!(expired, [true, true, false]);
    }
}

#[test]
fn a_walk_under_a_key_rate_paces_the_events_it_finds_no_token_for() {
    use crate::model::KeyRate;
    let rate = KeyRate {
        per_second: 2.0,
        burst: 2,
    };
    let flow = Flow {
        key_rate: Some(rate),
        ..Flow::default()
    };
    let unordered = Gating::new(GroupOrdering::None, &flow);
    assert!(!unordered.is_gated() && unordered.walks());
    assert_eq!(unordered.key_rate(), Some(rate));
    let now = Timestamp::from_millis(1_000);
    let mut pacer = unordered.pacer(now);
    let events = walked(&["a", "a", "a", "", "b", "a"]);
    let unknown = pacer.unknown(events.iter().map(|(_, k)| k.as_deref()));
    assert_eq!(unknown, ["a".to_owned(), "b".to_owned()]);
    for key in unknown {
        pacer.load(key, None);
    }
    let mut walk = GateWalk::new(unordered, 1, 10);
    assert_eq!(walk.window(6), Some((1, 6)));
    walk.pass_paced(events, |_| GateState::FREE, &mut pacer);
    let leased: Vec<u64> = walk.lease.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(leased, [1, 2, 4, 5], "a's burst of two, the keyless, b");
    let at = |ms| Timestamp::from_millis(ms);
    assert_eq!(
        walk.pace,
        vec![(3, None, at(1_500)), (6, None, at(2_000))],
        "a's next two, one interval apart"
    );
    assert_eq!(walk.next, 7);
    // Under an ordering a paced head holds its gate: what follows parks.
    let ordered = Gating::new(GroupOrdering::Key, &flow);
    let mut pacer = ordered.pacer(now);
    pacer.load("a", Some(2_000_000));
    pacer.load("b", None);
    let mut walk = GateWalk::new(ordered, 1, 10);
    walk.window(3);
    walk.pass_paced(walked(&["a", "a", "b"]), |_| GateState::FREE, &mut pacer);
    assert_eq!(walk.pace, vec![(1, Some("a".to_owned()), at(1_500))]);
    let parked: Vec<u64> = walk.park.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(parked, [2]);
    assert_eq!(walk.lease, vec![(3, Some("b".to_owned()))]);
}
