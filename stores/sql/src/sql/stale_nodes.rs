//! A node that has not seen another's delete yet (it has not read the
//! catalog generation since) still finds the deleted stream or group
//! gone: every call that used what it kept answers `stream_not_found` or
//! `group_not_found`, or runs again on what it reads afresh, and none
//! leaves a row behind under the deleted name
//! (`docs/operations.md#deleting-streams-and-groups`).
//!
//! Each dialect's tests open two backends on one store, the second never
//! reading the generation after its first call, and run these checks.

use std::sync::Arc;

use super::racing::{self, Chore, Load, Settle, Writers};
use super::{Dialect, SqlBackend};
use rheo_core::backend::conformance::{Harness, code, gn, sn};
use rheo_core::backend::{
    Backend, CreateStream, DeadLettersRequest, DeleteGroup, DeleteStream, LeasesRequest,
    Partitions, ReadRequest, Redrive, RenewRequest, Replay, ResetRequest,
};
use rheo_core::clock::FrozenClock;
use rheo_core::model::{EventInput, GroupName, GroupSpec, Lease, Query, StreamName};

/// A call node b makes with what it kept.
#[derive(Debug, Clone, Copy)]
enum Call {
    Append,
    GetStream,
    Read,
    Query,
    ListGroups,
    CreateGroup,
    Fetch,
    Ack,
    Nack,
    Renew,
    RenewMany,
    GroupInfo,
    Lag,
    NextDue,
    DeadLetters,
    Leases,
    Replay,
    Redrive,
    Reset,
}

const STREAM_CALLS: [Call; 19] = [
    Call::Append,
    Call::GetStream,
    Call::Read,
    Call::Query,
    Call::ListGroups,
    Call::CreateGroup,
    Call::Fetch,
    Call::Ack,
    Call::Nack,
    Call::Renew,
    Call::RenewMany,
    Call::GroupInfo,
    Call::Lag,
    Call::NextDue,
    Call::DeadLetters,
    Call::Leases,
    Call::Replay,
    Call::Redrive,
    Call::Reset,
];

/// The calls on a group: every stream call from `Fetch` on.
const GROUP_CALLS: &[Call] = STREAM_CALLS.split_at(6).1;

async fn call(
    b: &dyn Backend,
    what: Call,
    s: &StreamName,
    g: &GroupName,
    held: &Lease,
) -> &'static str {
    let r = match what {
        Call::Append => b.append(s, vec![EventInput::default()]).await.map(drop),
        Call::GetStream => b.get_stream(s).await.map(drop),
        Call::Read => {
            let req = ReadRequest {
                stream: s.clone(),
                partition: 0,
                after: 0,
                limit: 10,
            };
            b.read(req).await.map(drop)
        }
        Call::Query => b.query(s, &Query::default()).await.map(drop),
        Call::ListGroups => b.list_groups(s).await.map(drop),
        Call::CreateGroup => b.create_group(s, GroupSpec::new(gn("new"))).await.map(drop),
        Call::Fetch => {
            let req = rheo_core::backend::FetchRequest {
                stream: s.clone(),
                group: g.clone(),
                limit: 10,
                consumer_id: rheo_core::backend::conformance::cid("c2"),
                lease_ms: 30_000,
                partitions: Partitions::All,
            };
            b.fetch(req).await.map(drop)
        }
        Call::Ack => b.ack(s, g, held.target()).await,
        Call::Nack => b.nack(s, g, held.target(), None, Some(0)).await,
        Call::Renew => {
            let req = RenewRequest {
                stream: s.clone(),
                group: g.clone(),
                target: held.target(),
                lease_ms: 10_000,
            };
            b.renew(req).await.map(drop)
        }
        Call::RenewMany => b
            .renew_many(s, g, vec![held.target()], 10_000)
            .await
            .map(drop),
        Call::GroupInfo => b.group_info(s, g).await.map(drop),
        Call::Lag => b.lag(s, g, &Partitions::All).await.map(drop),
        Call::NextDue => b.next_due(s, g, &Partitions::All).await.map(drop),
        Call::DeadLetters => {
            let req = DeadLettersRequest {
                stream: s.clone(),
                group: g.clone(),
                limit: 10,
                after: None,
            };
            b.dead_letters(req).await.map(drop)
        }
        Call::Leases => {
            let req = LeasesRequest {
                stream: s.clone(),
                group: g.clone(),
                limit: 10,
                after: None,
            };
            b.leases(req).await.map(drop)
        }
        Call::Replay => {
            let how = Replay::FromSequence {
                after: 0,
                partitions: Partitions::All,
            };
            b.replay(s, g, how).await.map(drop)
        }
        Call::Redrive => b.redrive(s, g, Redrive::All).await.map(drop),
        Call::Reset => {
            let req = ResetRequest::to_the_beginning(s, g);
            b.reset(req).await
        }
    };
    code(r)
}

/// Rows of `table` under stream `s` (and group `g`, in a table that has
/// groups).
async fn rows_of<D: Dialect>(
    backend: &SqlBackend<D>,
    table: &str,
    s: &StreamName,
    g: Option<&GroupName>,
) -> u64 {
    let (stream_column, group_column) = match table {
        "rheo_streams" => ("name", None),
        "rheo_groups" => ("stream", Some("name")),
        "rheo_group_partitions" | "rheo_deliveries" => ("stream", Some("group_name")),
        _ => ("stream", None),
    };
    let mut from = format!("{table} WHERE {stream_column} = {{p}}1");
    let mut args = super::args![s];
    if let (Some(g), Some(column)) = (g, group_column) {
        from.push_str(&format!(" AND {column} = {{p}}2"));
        args.push(super::Arg::from(g));
    }
    super::retention_rows::count(backend, &from, args).await
}

const TABLES: [&str; 6] = [
    "rheo_streams",
    "rheo_partitions",
    "rheo_events",
    "rheo_groups",
    "rheo_group_partitions",
    "rheo_deliveries",
];

/// Stream `name` with `partitions` partitions and group `g` on a, four
/// events on b, and one of them leased by b: b keeps the stream and group.
async fn served(
    a: &Harness,
    b: &Harness,
    name: &str,
    partitions: u32,
) -> (StreamName, GroupName, Lease) {
    let s = a.stream(name, partitions).await;
    let g = a.group(&s, "g").await;
    b.append_n(&s, 2).await;
    b.append_to(&s, partitions - 1, 2).await;
    let held = b.fetch(&s, &g, 1).await.remove(0);
    b.b().get_stream(&s).await.expect("b reads the stream");
    (s, g, held)
}

/// The checks; `b` must not read the catalog generation after its first
/// call.
pub(crate) async fn a_stale_node_finds_deletes_and_leaves_nothing_behind<D: Dialect>(
    clock: Arc<FrozenClock>,
    a: Arc<SqlBackend<D>>,
    b: Arc<SqlBackend<D>>,
) {
    let ha = Harness::on(a.clone() as Arc<dyn Backend>, clock.clone());
    let hb = Harness::on(b.clone() as Arc<dyn Backend>, clock.clone());

    for (i, what) in STREAM_CALLS.into_iter().enumerate() {
        let (s, g, held) = served(&ha, &hb, &format!("s{i}"), 2).await;
        let delete = DeleteStream {
            stream: s.clone(),
            confirm: true,
        };
        a.delete_stream(delete).await.expect("delete on a");
        let got = call(hb.b(), what, &s, &g, &held).await;
        assert_eq!(got, "stream_not_found", "{what:?} on b");
        for table in TABLES {
            let left = rows_of(&a, table, &s, None).await;
            assert_eq!(left, 0, "{what:?} on b left rows in {table}");
        }
    }

    for (i, &what) in GROUP_CALLS.iter().enumerate() {
        let (s, g, held) = served(&ha, &hb, &format!("g{i}"), 2).await;
        let other = ha.group(&s, "other").await;
        let delete = DeleteGroup {
            stream: s.clone(),
            group: g.clone(),
            confirm: true,
        };
        a.delete_group(delete).await.expect("delete on a");
        let got = call(hb.b(), what, &s, &g, &held).await;
        assert_eq!(got, "group_not_found", "{what:?} on b");
        for table in &TABLES[3..] {
            let left = rows_of(&a, table, &s, Some(&g)).await;
            assert_eq!(left, 0, "{what:?} on b left rows in {table}");
        }
        assert_eq!(ha.lag(&s, &other).await.lag, 4, "the other group is whole");
    }

    // Created again with fewer, then more, partitions: b appends and
    // fetches by the new count, and writes only where the stream has
    // partitions.
    for (i, (before, after)) in [(3, 2), (2, 3)].into_iter().enumerate() {
        let (s, g, _) = served(&ha, &hb, &format!("r{i}"), before).await;
        let delete = DeleteStream {
            stream: s.clone(),
            confirm: true,
        };
        a.delete_stream(delete).await.expect("delete on a");
        let created = CreateStream {
            name: s.clone(),
            partition_count: after,
            retention: None,
        };
        a.create_stream(created).await.expect("create again on a");
        let g = ha.group(&s, g.as_str()).await;
        let keyed = |n: usize| -> Vec<EventInput> {
            (0..n)
                .map(|k| EventInput {
                    key: Some(format!("k{k}")),
                    ..EventInput::default()
                })
                .collect()
        };
        let on_b = hb.append_inputs(&s, keyed(8)).await;
        let on_a = ha.append_inputs(&s, keyed(8)).await;
        for (x, y) in on_b.iter().zip(&on_a) {
            assert_eq!(x.partition, y.partition, "b routes {:?} as a does", x.key);
        }
        let stream = hb.b().get_stream(&s).await.expect("b reads the new stream");
        assert_eq!(stream.partition_count, after);
        let leases = hb.fetch(&s, &g, 100).await;
        assert_eq!(
            leases.len(),
            16,
            "b serves every partition of the new stream"
        );
        for (table, expected) in [("rheo_partitions", after), ("rheo_group_partitions", after)] {
            let found = rows_of(&a, table, &s, None).await;
            assert_eq!(
                found,
                u64::from(expected),
                "{table} after {before} → {after}"
            );
        }
    }
    assert_eq!(code(hb.b().get_stream(&sn("s0")).await), "stream_not_found");
}

/// Error codes a call racing a delete may answer (a conflict is a
/// transaction that lost to the delete too often, and answers
/// `backend_unavailable`); never `failed`.
const RACING: [&str; 5] = [
    "stream_not_found",
    "group_not_found",
    "stale_lease",
    "already_exists",
    "backend_unavailable",
];

/// Each round: four events over three keys, fetches of three, settled
/// by ack and nack in turn; a replay, a redrive of `o`, a reset or a new
/// group.
const LOAD: Load = Load {
    batch: 4,
    keys: 3,
    limit: 3,
    settles: &[Settle::Ack, Settle::Nack],
    chores: &[
        Chore::Replay,
        Chore::Redrive("o"),
        Chore::Reset,
        Chore::NewGroup,
    ],
};

/// Writers on both nodes keep writing to a stream while one node deletes
/// it (or one of its groups): none gets `failed`, and once they stop,
/// nothing is left under the deleted name.
pub(crate) async fn writes_racing_a_delete_leave_nothing_behind<D: Dialect>(
    clock: Arc<FrozenClock>,
    a: Arc<SqlBackend<D>>,
    b: Arc<SqlBackend<D>>,
) {
    let ha = Harness::on(a.clone() as Arc<dyn Backend>, clock.clone());
    let s = sn("raced");
    for cycle in 0..6 {
        let delete_stream = cycle % 2 == 0;
        ha.stream(s.as_str(), 2).await;
        racing::groups(&ha, &s).await;
        let writers = Writers::start(a.clone(), b.clone(), &s, LOAD);
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        if delete_stream {
            let delete = DeleteStream {
                stream: s.clone(),
                confirm: true,
            };
            b.delete_stream(delete).await.expect("delete the stream");
        } else {
            let delete = DeleteGroup {
                stream: s.clone(),
                group: gn("o"),
                confirm: true,
            };
            b.delete_group(delete).await.expect("delete the group");
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        for got in writers.stop().await {
            let racing = RACING.contains(&got.code());
            assert!(racing, "cycle {cycle}: a writer got {}: {got}", got.code());
        }
        if delete_stream {
            for table in TABLES {
                let left = rows_of(&a, table, &s, None).await;
                assert_eq!(left, 0, "cycle {cycle}: rows left in {table}");
            }
        } else {
            for table in &TABLES[3..] {
                let left = rows_of(&a, table, &s, Some(&gn("o"))).await;
                assert_eq!(left, 0, "cycle {cycle}: rows left in {table}");
            }
            let delete = DeleteStream {
                stream: s.clone(),
                confirm: true,
            };
            a.delete_stream(delete).await.expect("delete the stream");
        }
    }
}
