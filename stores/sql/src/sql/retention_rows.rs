//! What a trim leaves in the tables (`docs/log.md#retention`): no row of
//! a removed event (its row, so its entries in the id index and every
//! other), no delivery below the new log start but dead letters, which
//! keep their event's id. The conformance checks see only the answers;
//! these look at the rows. Each dialect's tests run them.

use std::sync::Arc;

use super::racing::{self, Chore, Load, Settle, Writers};
use super::{Arg, Dialect, SqlBackend};
use rheo_core::backend::conformance::{Harness, eid, gn};
use rheo_core::backend::{Backend, DeadLettersRequest, TrimRequest};
use rheo_core::clock::FrozenClock;
use rheo_core::model::{EventInput, GroupOrdering, GroupSpec, StreamName};

/// `SELECT count(*) FROM <from>` with `{p}` standing for the dialect's
/// placeholder character; `args` bind in order. Counted on a write
/// connection, which sees every commit.
pub(super) async fn count<D: Dialect>(
    backend: &SqlBackend<D>,
    from: &str,
    args: Vec<Arg<'_>>,
) -> u64 {
    let sql = format!(
        "SELECT count(*) FROM {}",
        from.replace("{p}", &D::PLACEHOLDER.to_string())
    );
    let mut conn = backend
        .conn(super::Access::Write)
        .await
        .expect("a connection");
    let rows = super::Execute::rows(&mut *conn, D::bind(sqlx::AssertSqlSafe(sql), args))
        .await
        .expect("count rows");
    super::Row::<D>(rows.into_iter().next().expect("a count"))
        .u64(0)
        .expect("a count")
}

/// The stream's events below `before` (by position), and those with one
/// of `ids` (through the id index).
async fn events_left<D: Dialect>(
    b: &SqlBackend<D>,
    s: &StreamName,
    before: u64,
    ids: &[String],
) -> (u64, u64) {
    let by_position = count(
        b,
        "rheo_events WHERE stream = {p}1 AND partition = 0 AND sequence < {p}2",
        super::args![s, super::big(before)],
    )
    .await;
    let mut by_id = 0;
    for id in ids {
        let args = super::args![s, id.as_str()];
        by_id += count(b, "rheo_events WHERE stream = {p}1 AND id = {p}2", args).await;
    }
    (by_position, by_id)
}

/// Deliveries of the stream below `before`: (not dead letters, dead letters).
async fn deliveries_left<D: Dialect>(b: &SqlBackend<D>, s: &StreamName, before: u64) -> (u64, u64) {
    let below = "rheo_deliveries WHERE stream = {p}1 AND sequence < {p}2";
    let open = count(
        b,
        &format!("{below} AND status <> 'dead'"),
        super::args![s, super::big(before)],
    )
    .await;
    let dead = count(
        b,
        &format!("{below} AND status = 'dead'"),
        super::args![s, super::big(before)],
    )
    .await;
    (open, dead)
}

/// Two groups, one ordered by key, with every kind of delivery below the
/// trim point (acked, dead, leased, parked, available after a nack, never
/// reached): after the trim only the dead letters are left of them, and
/// the removed ids are free again.
pub(crate) async fn a_trim_leaves_no_row_of_what_it_removed<D: Dialect>(
    clock: Arc<FrozenClock>,
    backend: Arc<SqlBackend<D>>,
) {
    let h = Harness::on(backend.clone() as Arc<dyn Backend>, clock);
    let b = &*backend;
    let s = h.stream("trimmed", 1).await;
    let plain = h.group(&s, "plain").await;
    let keyed = GroupSpec {
        ordering: GroupOrdering::Key,
        ..GroupSpec::new(gn("keyed"))
    };
    let keyed = h.group_with(&s, keyed).await;
    let ids: Vec<String> = (1..=12).map(|i| format!("e{i}")).collect();
    let inputs = ids.iter().enumerate().map(|(i, id)| EventInput {
        id: Some(eid(id)),
        key: Some(["a", "b", "c"][i % 3].to_owned()),
        ..EventInput::default()
    });
    h.append_inputs(&s, inputs.collect()).await;

    // plain: 1 acked, 2 dead, 3 leased, 4 available again; 5.. never reached.
    let leases = h.fetch(&s, &plain, 4).await;
    h.ack(&leases[0]).await.expect("ack 1");
    h.reject(&leases[1], "bad").await.expect("reject 2");
    h.nack(&leases[3], "again", None).await.expect("nack 4");
    // keyed: the heads of a, b, c out (1, 2, 3), the rest parked; 2 dead,
    // which lets 5 (key b) out.
    let heads = h.fetch(&s, &keyed, 12).await;
    assert_eq!(heads.len(), 3);
    h.reject(&heads[1], "bad").await.expect("reject 2");

    let trimmed = b
        .trim(TrimRequest {
            stream: s.clone(),
            partition: 0,
            before: 8,
            limit: 1000,
        })
        .await
        .expect("trim");
    assert_eq!((trimmed.removed, trimmed.first_sequence), (7, 8));
    // keyed: 1, 3 to 7 open; plain: 3 and 4 open, 5 to 7 never reached.
    let skipped = vec![(keyed.clone(), 6), (plain.clone(), 5)];
    assert_eq!(trimmed.skipped, skipped);
    let removed = &ids[..7];
    assert_eq!(events_left(b, &s, 8, removed).await, (0, 0));
    assert_eq!(events_left(b, &s, 13, &ids[7..]).await, (5, 5));
    assert_eq!(
        deliveries_left(b, &s, 8).await,
        (0, 2),
        "the dead letters stay"
    );
    let first = count(
        b,
        "rheo_partitions WHERE stream = {p}1 AND first_sequence = 8",
        super::args![&s],
    )
    .await;
    assert_eq!(first, 1);
    let behind = count(
        b,
        "rheo_group_partitions WHERE stream = {p}1 AND cursor < 8",
        super::args![&s],
    )
    .await;
    assert_eq!(behind, 0, "every cursor at the log start at least");

    // The dead letters name their removed events.
    for g in [&plain, &keyed] {
        let page = b
            .dead_letters(DeadLettersRequest {
                stream: s.clone(),
                group: g.clone(),
                limit: 10,
                after: None,
            })
            .await
            .expect("dead letters");
        let listed: Vec<_> = (page.dead_letters.iter())
            .map(|d| (d.event_id.as_str(), d.sequence, d.event.is_none()))
            .collect();
        assert_eq!(listed, [("e2", 2, true)], "{g}");
    }
    // keyed: the next of each key is its head now: 8 (b), 9 (c), 10 (a).
    let next = h.fetch(&s, &keyed, 12).await;
    let got: Vec<u64> = next.iter().map(|l| l.event.sequence).collect();
    assert_eq!(got, [8, 9, 10]);

    // A removed id is free again: appending it makes a new event.
    let again = h
        .append_inputs(
            &s,
            vec![EventInput {
                id: Some(eid("e1")),
                ..EventInput::default()
            }],
        )
        .await;
    assert_eq!(again[0].sequence, 13);
}

/// What writers racing trims may be told: a settle of a lease whose event
/// went (`event_removed`), or that another writer settled, re-opened or
/// reset (`stale_lease`), a group name taken, a transaction the database
/// aborted for a deadlock three times over (`backend_unavailable`).
const RACING: [&str; 4] = [
    "stale_lease",
    "event_removed",
    "already_exists",
    "backend_unavailable",
];

/// Each round: six events over four keys, fetches of four, settled two
/// by ack, one by nack, one by reject; a replay, a redrive of any of the
/// three groups, a reset or a new group.
const LOAD: Load = Load {
    batch: 6,
    keys: 4,
    limit: 4,
    settles: &[Settle::Ack, Settle::Ack, Settle::Nack, Settle::Reject],
    chores: &[
        Chore::Replay,
        Chore::Redrive("o"),
        Chore::Reset,
        Chore::NewGroup,
        Chore::Redrive("g"),
        Chore::Redrive("f"),
    ],
};

/// Trims on one node race appends, fetches, settles, replays, redrives,
/// resets and new groups on both: no writer gets `failed` (a delivery
/// whose event is gone, say), and once they stop no delivery but a dead
/// letter and no cursor is below a partition's log start, and every group
/// drains to no lag.
pub(crate) async fn trims_racing_writers_leave_every_group_consistent<D: Dialect>(
    clock: Arc<FrozenClock>,
    a: Arc<SqlBackend<D>>,
    b: Arc<SqlBackend<D>>,
) {
    use rheo_core::backend::Partitions;
    use rheo_core::backend::retention::trim_stream;
    let h = Harness::on(a.clone() as Arc<dyn Backend>, clock);
    let s = h.stream("raced", 2).await;
    racing::groups(&h, &s).await;
    let keep = rheo_core::model::Retention {
        max_events: Some(8),
        ..rheo_core::model::Retention::default()
    };
    a.set_retention(&s, Some(keep))
        .await
        .expect("set retention");
    let writers = Writers::start(a.clone(), b, &s, LOAD);
    let mut removed = 0;
    for _ in 0..40 {
        match trim_stream(&*a, &s, 5).await {
            Ok(report) => removed += report.removed,
            Err(e) => assert_eq!(e.code(), "backend_unavailable", "a trim got {e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    for got in writers.stop().await {
        assert!(
            RACING.contains(&got.code()),
            "a writer got {}: {got}",
            got.code()
        );
    }
    assert!(removed > 0, "the trims removed events");
    let below = count(
        &a,
        "rheo_deliveries d JOIN rheo_partitions p \
         ON p.stream = d.stream AND p.partition = d.partition \
         WHERE d.stream = {p}1 AND d.sequence < p.first_sequence AND d.status <> 'dead'",
        super::args![&s],
    )
    .await;
    assert_eq!(below, 0, "deliveries below the log start");
    let behind = count(
        &a,
        "rheo_group_partitions gp JOIN rheo_partitions p \
         ON p.stream = gp.stream AND p.partition = gp.partition \
         WHERE gp.stream = {p}1 AND gp.cursor < p.first_sequence",
        super::args![&s],
    )
    .await;
    assert_eq!(behind, 0, "cursors below the log start");
    // Every gate keeps its rule (docs/groups.md#ordering,
    // docs/groups.md#flow): no more heads than its slots, and none short
    // of them while deliveries are parked behind it.
    for (group, slots) in [("o", 1), ("f", 2)] {
        let gates = |having: &str| {
            format!(
                "(SELECT partition, gate FROM rheo_deliveries \
                 WHERE stream = {{p}}1 AND group_name = {{p}}2 AND gate IS NOT NULL \
                 AND status IN ('available', 'leased', 'parked') \
                 GROUP BY partition, gate HAVING {having}) AS gates"
            )
        };
        let heads = "sum(CASE WHEN status = 'parked' THEN 0 ELSE 1 END)";
        let crowded = gates(&format!("{heads} > {{p}}3"));
        let args = || super::args![&s, group, super::big(slots)];
        assert_eq!(
            count(&a, &crowded, args()).await,
            0,
            "{group}: too many heads"
        );
        let parked = "sum(CASE WHEN status = 'parked' THEN 1 ELSE 0 END) > 0";
        let short = gates(&format!("{heads} < {{p}}3 AND {parked}"));
        let stuck = count(&a, &short, args()).await;
        assert_eq!(stuck, 0, "{group}: parked deliveries behind a free slot");
    }
    for group in a.list_groups(&s).await.expect("groups") {
        let g = &group.name;
        loop {
            let leases = h.fetch(&s, g, 100).await;
            if leases.is_empty() {
                break;
            }
            for lease in &leases {
                h.ack(lease).await.expect("ack");
            }
        }
        let lag = a.lag(&s, g, &Partitions::All).await.expect("lag");
        assert_eq!((lag.lag, lag.inflight), (0, 0), "{g}");
    }
}
