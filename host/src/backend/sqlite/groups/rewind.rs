//! Moving a group back: redrive dead letters, replay, reset.

use sqlx::{Row, SqliteConnection};

use super::{locate_all, positions, set_cursor, start_points};
use crate::backend::sqlite::{SqliteBackend, int, log, read_err, ts_text, write_err};
use crate::backend::{Redrive, Replay, ResetRequest, Result};
use crate::model::{GroupName, StreamName};

pub(in crate::backend::sqlite) async fn redrive(
    b: &SqliteBackend,
    s: &StreamName,
    g: &GroupName,
    which: Redrive,
) -> Result<u64> {
    b.meta(s).await?;
    let mut tx = b
        .writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(read_err)?;
    b.group_config(&mut tx, s, g).await?;
    let count = match which {
        Redrive::All => sqlx::query(include_str!("../sql/redrive_all.sql"))
            .bind(s.as_str())
            .bind(g.as_str())
            .execute(&mut *tx)
            .await
            .map_err(write_err)?
            .rows_affected(),
        Redrive::Events(ids) => {
            let mut n = 0;
            for (id, _, _) in locate_all(&mut tx, s, &ids).await? {
                n += sqlx::query(include_str!("../sql/redrive_event.sql"))
                    .bind(s.as_str())
                    .bind(g.as_str())
                    .bind(id.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(write_err)?
                    .rows_affected();
            }
            n
        }
    };
    tx.commit().await.map_err(write_err)?;
    Ok(count)
}

/// Re-opens the sequences strictly between `after` and `before` in one
/// partition: creates deliveries the group never had (below its start) and
/// makes every other one available now. Returns how many were not open.
async fn reopen(
    conn: &mut SqliteConnection,
    s: &StreamName,
    g: &GroupName,
    p: u32,
    after: u64,
    before: u64,
) -> Result<u64> {
    if after.saturating_add(1) >= before {
        return Ok(0);
    }
    let run = |statement: &'static str| {
        sqlx::query(statement)
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(i64::from(p))
            .bind(int(after))
            .bind(int(before))
    };
    let created = run(include_str!("../sql/reopen_insert.sql"))
        .execute(&mut *conn)
        .await
        .map_err(write_err)?
        .rows_affected();
    let reopened = run(include_str!("../sql/reopen_update.sql"))
        .execute(&mut *conn)
        .await
        .map_err(write_err)?
        .rows_affected();
    // Deliveries already open but waiting on a retry delay become due now;
    // they were not closed, so they are not counted.
    run(include_str!("../sql/reopen_undelay.sql"))
        .execute(&mut *conn)
        .await
        .map_err(write_err)?;
    Ok(created + reopened)
}

pub(in crate::backend::sqlite) async fn replay(
    b: &SqliteBackend,
    s: &StreamName,
    g: &GroupName,
    how: Replay,
) -> Result<u64> {
    how.validate()?;
    let meta = b.meta(s).await?;
    // A query replay reads the (immutable) log before taking the writer.
    let matched = match &how {
        Replay::Query(q) => Some(log::run_query(b, s, q, false).await?),
        _ => None,
    };
    let mut tx = b
        .writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(read_err)?;
    b.group_config(&mut tx, s, g).await?;
    let positions = positions(&mut tx, s, g).await?;
    let cursor = |p: u32| positions.get(&p).map_or(1, |(c, _)| *c);
    let mut count = 0;
    match how {
        Replay::FromSequence { after, partitions } => {
            for p in partitions.resolve(meta.partition_count)? {
                count += reopen(&mut tx, s, g, p, after, cursor(p)).await?;
            }
        }
        Replay::FromTime { from, partitions } => {
            for p in partitions.resolve(meta.partition_count)? {
                let row = sqlx::query(include_str!("../sql/first_at_or_after.sql"))
                    .bind(s.as_str())
                    .bind(i64::from(p))
                    .bind(ts_text(from))
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(read_err)?;
                let first: Option<i64> = row.try_get(0).map_err(read_err)?;
                if let Some(seq) = first {
                    let after = u64::try_from(seq - 1).unwrap_or(0);
                    count += reopen(&mut tx, s, g, p, after, cursor(p)).await?;
                }
            }
        }
        Replay::Query(_) => {
            for e in matched.unwrap_or_default() {
                let before = (e.sequence + 1).min(cursor(e.partition));
                count += reopen(&mut tx, s, g, e.partition, e.sequence - 1, before).await?;
            }
        }
        Replay::EventIds(ids) => {
            for (_, p, seq) in locate_all(&mut tx, s, &ids).await? {
                let before = (seq + 1).min(cursor(p));
                count += reopen(&mut tx, s, g, p, seq - 1, before).await?;
            }
        }
    }
    tx.commit().await.map_err(write_err)?;
    Ok(count)
}

pub(in crate::backend::sqlite) async fn reset(b: &SqliteBackend, req: ResetRequest) -> Result<()> {
    req.validate()?;
    let meta = b.meta(&req.stream).await?;
    let (s, g) = (&req.stream, &req.group);
    let mut tx = b
        .writer
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(read_err)?;
    b.group_config(&mut tx, s, g).await?;
    let parts = req.partitions.resolve(meta.partition_count)?;
    let starts = start_points(&mut tx, s, meta, &req.start).await?;
    for p in parts {
        sqlx::query(include_str!("../sql/reset_partition.sql"))
            .bind(s.as_str())
            .bind(g.as_str())
            .bind(i64::from(p))
            .execute(&mut *tx)
            .await
            .map_err(write_err)?;
        set_cursor(&mut tx, s, g, p, starts[p as usize] + 1).await?;
    }
    tx.commit().await.map_err(write_err)
}
