//! The statement files: every dialect has exactly one per statement.

use std::collections::BTreeSet;
use std::path::Path;

use super::Statement;

/// The `.sql` files of a dialect folder.
fn files(dialect: &str) -> BTreeSet<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src")
        .join(dialect)
        .join("sql");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn every_dialect_has_exactly_the_engines_statements() {
    let expected: BTreeSet<String> = Statement::ALL
        .iter()
        .map(|s| s.file_name().to_owned())
        .collect();
    for dialect in ["sqlite", "postgres"] {
        assert_eq!(files(dialect), expected, "{dialect}/sql/");
    }
}

#[test]
fn a_statement_of_only_comments_is_skipped() {
    assert!(!super::has_sql("-- nothing to do here\n\n  -- really\n"));
    assert!(super::has_sql("-- why\nSELECT 1\n"));
}

/// The rows of `rheo_deliveries`, as (sequence, status, attempt) in
/// sequence order, read by each dialect's test.
pub(crate) type DeliveryRows = futures::future::BoxFuture<'static, Vec<(i64, String, i64)>>;

/// An ack on a delivery's first attempt deletes its row, one on a later
/// attempt keeps it as 'acked', and a delivery at or before the group's
/// start keeps it whatever its attempt
/// (`migrations/*/0009_first_acks_leave_no_row.sql`). Single acks and
/// batch acks alike. Run by each dialect on one partition.
pub(crate) async fn first_attempt_acks_leave_no_row<D: super::Dialect>(
    b: &super::SqlBackend<D>,
    rows: impl Fn() -> DeliveryRows,
) {
    use rheo_core::backend::{Backend, CreateStream, FetchRequest, Partitions, Replay};
    use rheo_core::model::{
        ConsumerId, EventInput, GroupName, GroupSpec, Settlement, StartAfter, StartPosition,
        StreamName,
    };
    let (s, g) = (
        StreamName::parse("orders").unwrap(),
        GroupName::parse("billing").unwrap(),
    );
    let stream = CreateStream {
        name: s.clone(),
        partition_count: 1,
        retention: None,
    };
    b.create_stream(stream).await.unwrap();
    let appended = b.append(&s, vec![EventInput::default(); 5]).await.unwrap();
    let mut spec = GroupSpec::new(g.clone());
    spec.start = StartPosition::After(StartAfter::All(1));
    b.create_group(&s, spec).await.unwrap();
    let fetch = |limit| FetchRequest {
        stream: s.clone(),
        group: g.clone(),
        limit,
        consumer_id: ConsumerId::parse("c1").unwrap(),
        lease_ms: 60_000,
        partitions: Partitions::All,
    };
    let leases = b.fetch(fetch(4)).await.unwrap();
    b.ack(&s, &g, leases[0].target()).await.unwrap();
    b.nack(&s, &g, leases[1].target(), None, None)
        .await
        .unwrap();
    let batch = leases[2..]
        .iter()
        .map(|l| Settlement::ack(l.target()))
        .collect();
    b.settle(&s, &g, batch)
        .await
        .unwrap()
        .into_iter()
        .for_each(|r| r.unwrap());
    let none = |seq: i64, status: &str, attempt| (seq, status.to_owned(), attempt);
    assert_eq!(
        rows().await,
        vec![none(3, "available", 1)],
        "first attempts leave no row"
    );
    let again = b.fetch(fetch(4)).await.unwrap();
    assert_eq!(again[0].attempt, 2);
    b.ack(&s, &g, again[0].target()).await.unwrap();
    assert_eq!(rows().await, vec![none(3, "acked", 2)]);
    // The event before the start comes back never delivered, claimed once
    // and acked: it keeps its row, or a second replay would forget its attempt.
    let before = Replay::EventIds(vec![appended[0].event.id.clone()]);
    assert_eq!(b.replay(&s, &g, before).await.unwrap(), 1);
    let first = b.fetch(fetch(4)).await.unwrap();
    assert_eq!(first[0].attempt, 1);
    b.ack(&s, &g, first[0].target()).await.unwrap();
    assert_eq!(rows().await, vec![none(1, "acked", 1), none(3, "acked", 2)]);
}
